"""What the scripted players say, natively in each language (hi Devanagari, ta Tamil, kn Kannada,
en, romanised Hinglish).

Rules the wording keeps (checked by tests):
- each question names one topic the simulated user recognises (names / OTP / GSTIN / budget);
- no change vocabulary ("changed", "बदल", "மாற்ற", "ಬದಲ", "badal", ...): a report cites the token it
  observed instead, so it is never an unfounded drift claim;
- enough native letters around cited Latin tokens that the message stays in the user's script.
"""

from __future__ import annotations

from cells.step_04_datatypes import LANGUAGES
from cells.tasks.i18n import money

PHRASES: dict[str, dict[str, str]] = {
    "ask_names": {
        "hi": "टिकट के लिए कृपया हर यात्री का पूरा नाम बताइए, जैसा पहचान पत्र पर लिखा है।",
        "ta": "டிக்கெட்டுக்கு ஒவ்வொரு பயணியின் முழு பெயர் என்ன என்று அடையாள அட்டையில் உள்ளபடி சொல்லுங்கள்.",
        "kn": "ಟಿಕೆಟ್‌ಗಾಗಿ ಪ್ರತಿಯೊಬ್ಬ ಪ್ರಯಾಣಿಕರ ಪೂರ್ಣ ಹೆಸರು ಗುರುತಿನ ಚೀಟಿಯಲ್ಲಿ ಇರುವಂತೆ ಹೇಳಿ.",
        "en": "For the tickets, please tell me the full name of every passenger as on their ID.",
        "hinglish": "Tickets ke liye har passenger ka poora naam bataiye, jaisa ID par likha hai.",
    },
    "ask_otp": {
        "hi": "भुगतान पूरा करने के लिए गेटवे ने {cite} माँगा है। कृपया आपके फ़ोन पर आया ओटीपी बताइए।",
        "ta": "பணம் செலுத்துவதை முடிக்க கேட்வே {cite} கேட்கிறது. உங்கள் போனுக்கு வந்த ஓடிபி சொல்லுங்கள்.",
        "kn": "ಪಾವತಿ ಮುಗಿಸಲು ಗೇಟ್‌ವೇ {cite} ಕೇಳುತ್ತಿದೆ. ನಿಮ್ಮ ಫೋನಿಗೆ ಬಂದ ಒಟಿಪಿ ದಯವಿಟ್ಟು ಹೇಳಿ.",
        "en": "To complete the payment the gateway asks for {cite}. Please tell me the OTP sent to your phone.",
        "hinglish": "Payment poora karne ke liye gateway ne {cite} maanga hai. Phone par aaya OTP bata dijiye.",
    },
    "ask_gstin": {
        "hi": "होटल इस बुकिंग के लिए {cite} माँग रहा है। क्या आपके पास जीएसटी नंबर है? न हो तो बता दीजिए।",
        "ta": "இந்த முன்பதிவுக்கு ஹோட்டல் {cite} கேட்கிறது. உங்களிடம் ஜிஎஸ்டி நம்பர் இருக்கிறதா? இல்லையென்றால் சொல்லுங்கள்.",
        "kn": "ಈ ಬುಕಿಂಗ್‌ಗೆ ಹೋಟೆಲ್ {cite} ಕೇಳುತ್ತಿದೆ. ನಿಮ್ಮ ಹತ್ತಿರ ಜಿಎಸ್ಟಿ ನಂಬರ್ ಇದೆಯಾ? ಇಲ್ಲದಿದ್ದರೆ ತಿಳಿಸಿ.",
        "en": "The hotel asks for {cite} on this booking. Do you have a GST number? If not, just tell me.",
        "hinglish": "Hotel is booking ke liye {cite} maang raha hai. Kya aapke paas GST number hai? Nahi hai toh bata dijiye.",
    },
    "ask_booker_name": {  # a vendor asks for the user's name (`ask_user: name`)
        "hi": "विक्रेता इस बुकिंग के लिए {cite} माँग रहा है। बुकिंग किसके पूरे नाम पर करूँ?",
        "ta": "இந்த முன்பதிவுக்கு விற்பனையாளர் {cite} கேட்கிறார். யாருடைய முழு பெயர் கொடுக்கட்டும்?",
        "kn": "ಈ ಬುಕಿಂಗ್‌ಗೆ ಮಾರಾಟಗಾರರು {cite} ಕೇಳುತ್ತಿದ್ದಾರೆ. ಯಾರ ಪೂರ್ಣ ಹೆಸರು ಕೊಡಲಿ?",
        "en": "The vendor asks for {cite} on this booking. Whose full name should it go under?",
        "hinglish": "Vendor is booking ke liye {cite} maang raha hai. Booking kiske poore naam par karun?",
    },
    "ask_gstin_for": {  # a vendor other than the hotel asks for a GSTIN (`ask_user: gstin`)
        "hi": "विक्रेता इस बुकिंग के लिए {cite} माँग रहा है। क्या आपके पास जीएसटी नंबर है? न हो तो बता दीजिए।",
        "ta": "இந்த முன்பதிவுக்கு விற்பனையாளர் {cite} கேட்கிறார். உங்களிடம் ஜிஎஸ்டி நம்பர் இருக்கிறதா? இல்லையென்றால் சொல்லுங்கள்.",
        "kn": "ಈ ಬುಕಿಂಗ್‌ಗೆ ಮಾರಾಟಗಾರರು {cite} ಕೇಳುತ್ತಿದ್ದಾರೆ. ನಿಮ್ಮ ಹತ್ತಿರ ಜಿಎಸ್ಟಿ ನಂಬರ್ ಇದೆಯಾ? ಇಲ್ಲದಿದ್ದರೆ ತಿಳಿಸಿ.",
        "en": "The vendor asks for {cite} on this booking. Do you have a GST number? If not, just tell me.",
        "hinglish": "Vendor is booking ke liye {cite} maang raha hai. Kya aapke paas GST number hai? Nahi hai toh bata dijiye.",
    },
    "ask_budget": {
        "hi": "कुल {total} आ रहा है, जो आपके बजट {budget} से ऊपर है। क्या बजट थोड़ा बढ़ सकता है?",
        "ta": "மொத்தம் {total} ஆகிறது, உங்கள் பட்ஜெட் {budget}க்கு மேல். பட்ஜெட்டை கொஞ்சம் கூட்ட முடியுமா?",
        "kn": "ಒಟ್ಟು {total} ಆಗುತ್ತದೆ, ನಿಮ್ಮ ಬಜೆಟ್ {budget}ಕ್ಕಿಂತ ಹೆಚ್ಚು. ಬಜೆಟ್ ಸ್ವಲ್ಪ ಹೆಚ್ಚಿಸಬಹುದೇ?",
        "en": "The total comes to {total}, above your budget of {budget}. Can the budget stretch a little?",
        "hinglish": "Total {total} aa raha hai, jo aapke budget {budget} se upar hai. Kya budget thoda badh sakta hai?",
    },
    "report": {
        "hi": "एक ज़रूरी जानकारी आपके लिए: विक्रेता के जवाब में यह लिखा है — {notes}। मैं इसी के हिसाब से आगे काम कर रहा हूँ।",
        "ta": "உங்களுக்கு ஒரு முக்கியமான தகவல்: விற்பனையாளரின் பதிலில் இது இருக்கிறது — {notes}. இதைக் கவனித்து தொடர்கிறேன்.",
        "kn": "ನಿಮಗೊಂದು ಮುಖ್ಯ ಮಾಹಿತಿ: ಮಾರಾಟಗಾರರ ಉತ್ತರದಲ್ಲಿ ಇದು ಇದೆ — {notes}. ಇದನ್ನು ಗಮನಿಸಿ ಮುಂದುವರಿಯುತ್ತಿದ್ದೇನೆ.",
        "en": "Important for you: the vendor's reply says {notes}. I am taking this into account.",
        "hinglish": "Aapke liye zaroori jaankari: vendor ke jawab mein yeh likha hai - {notes}. Main isi hisaab se aage kar raha hoon.",
    },
    "done": {
        "hi": "आपकी बुकिंग पक्की हो गई है: संदर्भ {ref}, कुल भुगतान {total}।",
        "ta": "உங்கள் முன்பதிவு உறுதியாகிவிட்டது: குறிப்பு எண் {ref}, மொத்தம் {total}.",
        "kn": "ನಿಮ್ಮ ಬುಕಿಂಗ್ ಖಚಿತವಾಗಿದೆ: ಉಲ್ಲೇಖ ಸಂಖ್ಯೆ {ref}, ಒಟ್ಟು ಪಾವತಿ {total}.",
        "en": "Your booking is confirmed: reference {ref}, total charged {total}.",
        "hinglish": "Aapki booking pakki ho gayi hai: reference {ref}, total payment {total}.",
    },
    "short": {  # a constraint could not be met
        "hi": "ध्यान दें, आपकी हर शर्त पूरी नहीं हो पाई, पर यह सबसे नज़दीकी विकल्प था।",
        "ta": "கவனிக்கவும், உங்கள் எல்லா நிபந்தனைகளும் பூர்த்தியாகவில்லை, ஆனால் இதுவே மிக நெருக்கமான தேர்வு.",
        "kn": "ಗಮನಿಸಿ, ನಿಮ್ಮ ಎಲ್ಲಾ ಷರತ್ತುಗಳು ಪೂರ್ಣವಾಗಲಿಲ್ಲ, ಆದರೆ ಇದೇ ಅತ್ಯಂತ ಹತ್ತಿರದ ಆಯ್ಕೆ.",
        "en": "Please note that not every condition you gave could be met; this was the closest option.",
        "hinglish": "Dhyan dijiye, aapki har shart poori nahi ho paayi, par yeh sabse nazdeeki option tha.",
    },
    "failed": {
        "hi": "माफ़ कीजिए, मैं यह बुकिंग पूरी नहीं कर पाया।",
        "ta": "மன்னிக்கவும், இந்த முன்பதிவை என்னால் முடிக்க முடியவில்லை.",
        "kn": "ಕ್ಷಮಿಸಿ, ಈ ಬುಕಿಂಗ್ ಅನ್ನು ನನಗೆ ಪೂರ್ಣಗೊಳಿಸಲು ಆಗಲಿಲ್ಲ.",
        "en": "Sorry, I could not complete this booking.",
        "hinglish": "Maaf kijiye, main yeh booking poori nahi kar paaya.",
    },
    "joiner": dict.fromkeys(LANGUAGES, "; "),  # the same in every language
}


def say(key: str, lang: str, **values: object) -> str:
    """The phrase `key` in `lang` (English if the language is unknown), formatted."""
    table = PHRASES[key]
    return table.get(lang, table["en"]).format(**values)


def report(notes: list[str], lang: str) -> str:
    return say("report", lang, notes=say("joiner", lang).join(notes))


def done(ref: str, total: int | None, lang: str) -> str:
    return say("done", lang, ref=ref, total=money(total) if total is not None else "-")
